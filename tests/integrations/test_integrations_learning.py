"""Learning from use in the Pydantic AI and OpenAI Agents SDK hooks (as the LangChain middleware does,
``test_the_tools_the_model_calls_are_learned_as_examples_of_their_message``): the tools the model called
in its reply to a choice become examples of the choice's message (``ToolSelector.record_calls``), once
per reply, never for a reply of an earlier run, and a failing record never fails the run. Each run is
the framework's own agent loop on its offline model (``FunctionModel``, the Agents SDK's
``ScriptedModel``); the selection runs on the real MiniLM (int8)."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents import Runner, function_tool, set_tracing_disabled
from agents.mcp import MCPServerStdio
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from contextsieve.integrations.openai_agents import ContextSieveHooks, ContextSieveToolFilter
from contextsieve.integrations.pydantic_ai import SelectedToolset
from contextsieve.integrations.selector import ToolSelector

set_tracing_disabled(True)

WEATHER = "Will it rain in Lisbon tomorrow?"
BOTH = "Will it rain in Lisbon tomorrow, and how much is 250 US dollars in euros?"
#: (name, description) of the agent's tools in both frameworks
CATALOG = [
    ("get_weather", "Current weather and the forecast for a city: temperature, rain, wind."),
    ("convert_currency", "Convert an amount of money from one currency to another at today's exchange rate."),
    ("send_email", "Send an email message to a recipient with a subject and body."),
    ("order_pizza", "Order a pizza for delivery."),
    ("play_music", "Play a song on the user's speakers."),
    ("restart_service", "Restart a systemd service on the production server."),
]


def _learned(selector: ToolSelector | None) -> dict[str, list[str]]:
    """The examples the selector's engine recorded, by tool name."""
    assert selector is not None
    store = selector.session.store
    assert not store.misses  # examples only
    return {k.name: [e.text for e in v] for k, v in store.examples.items()}


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Every ToolSelector.record_calls: (the choice's message, the names passed)."""
    calls: list[tuple[str, list[str]]] = []
    real = ToolSelector.record_calls

    def spy(self: ToolSelector, choice: Any, called: Any) -> Any:
        calls.append((choice.request.message, list(called)))
        return real(self, choice, called)

    monkeypatch.setattr(ToolSelector, "record_calls", spy)
    return calls


def _failing(monkeypatch: pytest.MonkeyPatch) -> RuntimeError:
    error = RuntimeError("history database is locked")

    def fail(self: ToolSelector, choice: Any, called: Any) -> Any:
        raise error

    monkeypatch.setattr(ToolSelector, "record_calls", fail)
    return error


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "contextsieve.integrations"]


# -- Pydantic AI ------------------------------------------------------------------------------------------


def _toolset(int8: Any, ran: list[str]) -> SelectedToolset[Any]:
    def make(name: str) -> Any:
        def run(city: str = "", amount: float = 0) -> str:
            ran.append(name)
            return {"get_weather": "Lisbon: 80% chance of rain, 17 C", "convert_currency": "230.00 EUR"}.get(name, "ok")

        return run

    tools: FunctionToolset[Any] = FunctionToolset()
    for name, description in CATALOG:
        tools.add_function(make(name), name=name, description=description)
    return SelectedToolset(tools, embedder=int8, cache_dir=False)


class Caller:
    """A FunctionModel function: at a user prompt it calls, in one reply, each tool whose key word the
    prompt has (if offered); after tool returns it answers."""

    WORDS = {"rain": ("get_weather", {"city": "Lisbon"}), "euros": ("convert_currency", {"amount": 250})}

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        names = [t.name for t in info.function_tools]
        self.sent.append(names)
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart("answered")])
        prompt = str(last.parts[-1].content)
        calls = [ToolCallPart(t, a) for w, (t, a) in self.WORDS.items() if w in prompt and t in names]
        return ModelResponse(parts=calls or [TextPart("nothing to call")])


def test_pydantic_ai_learns_the_tools_each_reply_called_once(int8: Any, recorded: list[Any]) -> None:
    ran: list[str] = []
    toolset = _toolset(int8, ran)
    model = Caller()
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    first = agent.run_sync(WEATHER)
    assert first.output == "answered" and ran == ["get_weather"]
    assert _learned(toolset.selector) == {"get_weather": [WEATHER]}
    assert recorded == [(WEATHER, ["get_weather"])]

    # one reply calling two tools: both recorded in one record_calls (not one per tool call)
    second = agent.run_sync(BOTH, message_history=first.all_messages())
    assert second.output == "answered" and sorted(ran[1:]) == ["convert_currency", "get_weather"]
    assert {"get_weather", "convert_currency"} <= set(model.sent[2])
    assert recorded[1:] == [(BOTH, ["get_weather", "convert_currency"])]
    assert _learned(toolset.selector) == {"get_weather": [BOTH, WEATHER], "convert_currency": [BOTH]}
    assert toolset.last_error is None


def test_pydantic_ai_does_not_record_a_reply_of_an_earlier_run(int8: Any, recorded: list[Any]) -> None:
    """A resumed history whose last reply has calls still to run: that reply was made before this run
    (it was recorded there, if this toolset chose for it), so it is not recorded again."""
    ran: list[str] = []
    toolset = _toolset(int8, ran)
    history: list[ModelMessage] = [
        ModelRequest.user_text_prompt(WEATHER),
        ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Lisbon"}, tool_call_id="c1")]),
    ]
    result = Agent(FunctionModel(Caller()), toolsets=[toolset]).run_sync(message_history=history)
    assert result.output == "answered" and ran == ["get_weather"]  # the pending call ran
    assert recorded == [] and _learned(toolset.selector) == {}


def test_pydantic_ai_a_failing_record_does_not_fail_the_run(
    int8: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    error = _failing(monkeypatch)
    caplog.set_level(logging.WARNING, logger="contextsieve.integrations")
    ran: list[str] = []
    toolset = _toolset(int8, ran)
    result = Agent(FunctionModel(Caller()), toolsets=[toolset]).run_sync(WEATHER)
    assert result.output == "answered" and ran == ["get_weather"]  # the tool ran, the run ended normally
    assert toolset.last_error is error and not toolset.last_choice.failed_open
    [warning] = _warnings(caplog)
    assert "not recorded" in warning and "history database is locked" in warning


# -- OpenAI Agents SDK --------------------------------------------------------------------------------------


class Keeping(ContextSieveHooks):
    """ContextSieveHooks that also keep every model reply (to hand one on again)."""

    def __init__(self, sieve: ContextSieveToolFilter) -> None:
        super().__init__(sieve)
        self.replies: list[tuple[Any, Any, Any]] = []

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.replies.append((context, agent, response))
        await super().on_llm_end(context, agent, response)


def _sdk_agent(int8: Any, ran: list[str], model: ScriptedModel) -> tuple[SdkAgent[Any], ContextSieveToolFilter]:
    def make(name: str, description: str) -> Any:
        def run(city: str = "", amount: float = 0) -> str:
            ran.append(name)
            return "ok"

        return function_tool(run, name_override=name, description_override=description)

    sieve = ContextSieveToolFilter(embedder=int8, cache_dir=False)
    agent = SdkAgent(name="a", model=model, tools=sieve.function_tools([make(n, d) for n, d in CATALOG]))
    return agent, sieve


def test_openai_agents_learns_the_tools_each_reply_called_once(int8: Any, recorded: list[Any]) -> None:
    ran: list[str] = []
    model = ScriptedModel(
        [
            [
                function_call("get_weather", {"city": "Lisbon"}, call_id="w1"),
                function_call("convert_currency", {"amount": 250}, call_id="m1"),
            ],
            [function_call("get_weather", {"city": "Porto"}, call_id="w2")],  # the same tool again
            [assistant_message("answered")],
        ]
    )
    agent, sieve = _sdk_agent(int8, ran, model)
    hooks = Keeping(sieve)
    result = asyncio.run(Runner.run(agent, BOTH, hooks=hooks))
    assert result.final_output == "answered" and ran == ["get_weather", "convert_currency", "get_weather"]
    sent = {t.name for t in model.calls[0].tools}
    assert {"get_weather", "convert_currency"} <= sent
    # the first reply's two tools in one record; the second reply got the choice of the next model call
    # (a new one: the tool results changed it) and is recorded against it
    assert recorded == [(BOTH, ["get_weather", "convert_currency"]), (BOTH, ["get_weather"])]
    assert _learned(sieve.selector) == {"get_weather": [BOTH], "convert_currency": [BOTH]}  # one example each

    # a reply handed on again (as a resumed run may): nothing more is recorded
    for context, agent_, response in hooks.replies:
        asyncio.run(sieve.record_response(context, agent_, response))
    assert len(recorded) == 2 and sieve.last_error is None


def test_openai_agents_records_nothing_without_the_hooks(int8: Any, recorded: list[Any]) -> None:
    ran: list[str] = []
    model = ScriptedModel([[function_call("get_weather", {"city": "Lisbon"}, call_id="w1")], [assistant_message("ok")]])
    agent, sieve = _sdk_agent(int8, ran, model)
    asyncio.run(Runner.run(agent, WEATHER))
    assert ran == ["get_weather"] and recorded == [] and _learned(sieve.selector) == {}


def test_openai_agents_a_failing_record_does_not_fail_the_run(
    int8: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    error = _failing(monkeypatch)
    caplog.set_level(logging.WARNING, logger="contextsieve.integrations")
    ran: list[str] = []
    model = ScriptedModel([[function_call("get_weather", {"city": "Lisbon"}, call_id="w1")], [assistant_message("ok")]])
    agent, sieve = _sdk_agent(int8, ran, model)
    result = asyncio.run(Runner.run(agent, WEATHER, hooks=ContextSieveHooks(sieve)))
    assert result.final_output == "ok" and ran == ["get_weather"]
    assert sieve.last_error is error and not sieve.last_choice.failed_open
    [warning] = _warnings(caplog)
    assert "not recorded" in warning and "history database is locked" in warning


def test_openai_agents_learns_an_mcp_tool(int8: Any, recorded: list[Any]) -> None:
    """Through the MCP tool_filter (the real time server over stdio) the reply's call is learned too."""
    sieve = ContextSieveToolFilter(embedder=int8, cache_dir=False)
    message = "What time is it in Tokyo right now?"
    model = ScriptedModel(
        [[function_call("get_current_time", {"timezone": "Asia/Tokyo"}, call_id="t1")], [assistant_message("ok")]]
    )

    async def main() -> Any:
        args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
        server = MCPServerStdio(
            params={"command": sys.executable, "args": args},
            name="time",
            tool_filter=sieve,
            client_session_timeout_seconds=60,
        )
        async with server:
            agent = SdkAgent(name="a", model=model, mcp_servers=[server])
            return await Runner.run(agent, message, hooks=ContextSieveHooks(sieve))

    assert asyncio.run(main()).final_output == "ok"
    assert "get_current_time" in {t.name for t in model.calls[0].tools}
    assert recorded == [(message, ["get_current_time"])]
    assert _learned(sieve.selector) == {"get_current_time": [message]}
