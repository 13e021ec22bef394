"""Hooks fail open (issue 37): a fault of contextsieve's (the embedder raises or returns NaN, the cache
folder is a file, the cached model graph was tampered with, a lone surrogate in a tool description or
in the user's message, the Agents SDK's ``message_of`` raising or returning a non-str) never ends the
agent's run nor leaves the model with fewer tools: the call gets every tool the agent gave it, the
error is kept in ``last_error`` and in the integration's record, and one warning is logged. With
``fail_open=False`` the call raises :class:`ToolChoiceError`, the fault as its cause.

Every run is the framework's own agent loop on its offline model (a scripted LangChain chat model,
Pydantic AI's ``FunctionModel``, the Agents SDK's ``ScriptedModel`` with a real MCP server over stdio);
the faults are real: embedder objects that raise or return NaN, a regular file as the cache folder, a
copy of the MiniLM graph cache with garbage written into the graph file."""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contextsieve.errors import (
    ContextSieveError,
    EmbedderOutputError,
    EmbeddingCacheError,
    InputError,
    ModelCacheError,
    ToolChoiceError,
)
from tests.helpers.fake_embedder import DIM, FakeEmbedder

SURROGATE = "\ud800"
MESSAGE = "Will it rain in Paris tomorrow? I need the weather forecast for the city."
#: (name, description): the agent's tools
CATALOG = [
    ("get_weather", "Get the weather forecast for a city: rain, wind and temperature"),
    ("send_email", "Send an email message to a recipient"),
    ("convert_currency", "Convert an amount of money from one currency to another"),
    ("search_flights", "Search airline flights between two airports on a date"),
    ("create_calendar_event", "Create an event in the user's calendar"),
    ("restart_service", "Restart a production service in the cluster"),
    ("play_music", "Play a song on the user's speakers"),
    ("order_food", "Order food delivery from a restaurant"),
]
#: a tool whose description holds a lone surrogate (the fault ``surrogate_in_description``)
BAD_TOOL = ("lookup_word", f"Look up a word in the dictionary {SURROGATE} and give its meaning")
TIME_TOOLS = ["get_current_time", "convert_time"]  # mcp_server_time's

FAULTS = [
    "embedder_raises",
    "nan_vectors",
    "cache_dir_is_a_file",
    "tampered_graph",
    "surrogate_in_description",
    "surrogate_in_message",
]
MESSAGE_OF_FAULTS = ["message_of_raises", "message_of_not_str"]


class RaisingEmbedder(FakeEmbedder):
    """A user's embedder whose service is down: a plain RuntimeError, no contextsieve type."""

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        self.calls += 1
        raise RuntimeError("embedding service unavailable (HTTP 503)")


class NaNEmbedder(FakeEmbedder):
    """An embedder that returns vectors of NaN."""

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        self.calls += 1
        return np.full((len(texts), DIM), np.nan, dtype=np.float32)


class CachedEmbedder(FakeEmbedder):
    """The fake embedder with a model id, so its vectors go to the disk cache (``cache_dir``)."""

    model_id = "fake-bag-of-words/1"


@dataclass
class Fault:
    """How one fault is set up: the integration's ``embedder`` and ``cache_dir``, whether a tool with
    a bad description is added, the user's message, the Agents SDK's ``message_of``, and the type of
    the error it causes (``None``: not a fault for that framework)."""

    embedder: Any
    cache_dir: Any
    bad_tool: bool
    message: str
    message_of: Callable[[Any], Any] | None
    cause: type[BaseException] | None


def _no_user_id(ctx: Any) -> str:
    raise KeyError("user_id")  # a user's message_of that expects something the context lacks


@pytest.fixture(scope="module")
def tampered_cache(tmp_path_factory: pytest.TempPathFactory, int8: Any, model_cache: Path) -> Path:
    """A model cache holding the int8 MiniLM graph (copied from the session's) with garbage written
    into the graph file; its entry still records the sha256 of the real graph."""
    root = tmp_path_factory.mktemp("tampered-cache")
    (root / "models").mkdir()
    for f in (model_cache / "models").glob("*-int8-sentence-*"):
        shutil.copy2(f, root / "models" / f.name)
    if (model_cache / "weights").is_dir():  # the weights' sha256 memo: spares hashing 90 MB again
        shutil.copytree(model_cache / "weights", root / "weights")
    graphs = sorted((root / "models").glob("*.onnx"))
    assert graphs, "the int8 fixture built no graph"
    for g in graphs:
        with g.open("r+b") as f:
            f.seek(g.stat().st_size // 2)
            f.write(b"garbage written into the cached graph")
    return root


@pytest.fixture
def fault_of(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str, str], Fault]:
    """``fault_of(name, framework)``: the set-up of fault ``name`` (``"healthy"``: none)."""

    def make(name: str, framework: str) -> Fault:
        f = Fault(FakeEmbedder(), False, False, MESSAGE, None, None)
        if name == "embedder_raises":
            f.embedder, f.cause = RaisingEmbedder(), RuntimeError
        elif name == "nan_vectors":
            f.embedder, f.cause = NaNEmbedder(), EmbedderOutputError
        elif name == "cache_dir_is_a_file":
            blocker = tmp_path / "cache"
            blocker.write_text("a regular file where the cache folder should be", encoding="utf-8")
            f.embedder, f.cache_dir, f.cause = CachedEmbedder(), blocker, EmbeddingCacheError
        elif name == "tampered_graph":  # the default embedder (MiniLM, loaded on first need) from that cache
            cache = request.getfixturevalue("tampered_cache")
            monkeypatch.setenv("CONTEXTSIEVE_CACHE", str(cache))
            monkeypatch.setenv("CONTEXTSIEVE_VARIANT", "int8")
            f.embedder, f.cause = None, ModelCacheError
        elif name == "surrogate_in_description":
            f.bad_tool, f.cause = True, InputError
        elif name == "surrogate_in_message":
            f.message = f"Will it rain in Paris {SURROGATE} tomorrow?"
            # Pydantic AI's toolset reads a query with lone surrogates replaced: not a fault there
            f.cause = None if framework == "pydantic_ai" else InputError
        elif name == "message_of_raises":
            f.message_of, f.cause = _no_user_id, KeyError
        elif name == "message_of_not_str":
            f.message_of, f.cause = (lambda ctx: ["not", "a", "str"]), InputError
        else:
            assert name == "healthy"
        return f

    return make


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "contextsieve.integrations" and r.levelno == logging.WARNING
    ]


def _check_failed_open(sieve: Any, fault: Fault, everything: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """The integration kept the error (the fault's own type) and a failed-open record, and logged one
    warning that names the error."""
    assert fault.cause is not None
    error = sieve.last_error
    assert type(error) is fault.cause if fault.cause is RuntimeError else isinstance(error, fault.cause)
    last = sieve.choices[-1]
    assert last.failed_open and last.error is error and last.request is None and last.instructions == ""
    assert sorted(last.tools) == sorted(everything)
    record = last.to_dict()
    assert record["failed_open"] is True and record["error"].startswith(type(error).__name__ + ": ")
    assert record["tools"] == list(last.tools) and record["context"] is None
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings  # one per failed model call, not one per tool
    assert type(error).__name__ in warnings[0] and f"all {len(everything)} tools" in warnings[0]


def _check_cause(raised: pytest.ExceptionInfo[ToolChoiceError], fault: Fault) -> None:
    assert fault.cause is not None
    assert isinstance(raised.value, ContextSieveError)
    cause = raised.value.__cause__
    assert type(cause) is fault.cause if fault.cause is RuntimeError else isinstance(cause, fault.cause)
    assert type(cause).__name__ in str(raised.value)


# -- LangChain --------------------------------------------------------------------------------------------


def _langchain_run(fault: Fault, **kw: Any) -> tuple[list[list[str]], dict[str, Any], Any, list[str]]:
    from langchain.agents import create_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from contextsieve.integrations.langchain import ContextSieveMiddleware

    class Recording(BaseChatModel):
        """Records the tool names of every call and answers at once."""

        seen: list[list[str]]

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **k: Any) -> Any:
            self.seen.append([t["function"]["name"] for t in k.get("tools") or []])
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="done"))])

        @property
        def _llm_type(self) -> str:
            return "recording"

    def run(query: str) -> str:
        return "ok"

    catalog = [*CATALOG, BAD_TOOL] if fault.bad_tool else CATALOG
    tools = [StructuredTool.from_function(run, name=n, description=d) for n, d in catalog]
    model = Recording(seen=[])
    mw = ContextSieveMiddleware(embedder=fault.embedder, cache_dir=fault.cache_dir, **kw)
    agent = create_agent(model, tools=tools, middleware=[mw])
    out = agent.invoke({"messages": [{"role": "user", "content": fault.message}]})
    return model.seen, out, mw, [n for n, _ in catalog]


@pytest.mark.parametrize("name", FAULTS)
def test_langchain_fails_open(name: str, fault_of: Any, caplog: pytest.LogCaptureFixture) -> None:
    fault = fault_of(name, "langchain")
    caplog.set_level(logging.WARNING, logger="contextsieve.integrations")
    seen, out, mw, everything = _langchain_run(fault)
    assert seen == [everything]  # every tool the agent has, in its order, nothing else
    assert out["messages"][-1].content == "done"  # the run completed
    [record] = out["contextsieve"]  # the state's record says it failed open
    assert record["failed_open"] is True and record["tools"] == everything
    _check_failed_open(mw, fault, everything, caplog)


@pytest.mark.parametrize("name", FAULTS)
def test_langchain_fail_open_false_raises_the_cause(name: str, fault_of: Any) -> None:
    fault = fault_of(name, "langchain")
    with pytest.raises(ToolChoiceError, match="LangChain ContextSieveMiddleware") as raised:
        _langchain_run(fault, fail_open=False)
    _check_cause(raised, fault)


def test_langchain_healthy_run_chooses(fault_of: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The control: without a fault the same run sends fewer tools and records no error."""
    seen, out, mw, everything = _langchain_run(fault_of("healthy", "langchain"))
    assert "get_weather" in seen[0] and len(seen[0]) < len(everything)
    assert mw.last_error is None and out["contextsieve"][0]["failed_open"] is False
    assert _warnings(caplog) == []


# -- Pydantic AI ------------------------------------------------------------------------------------------


def _pydantic_run(fault: Fault, **kw: Any) -> tuple[list[list[str]], Any, Any, list[str]]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from contextsieve.integrations.pydantic_ai import SelectedToolset

    seen: list[list[str]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append([t.name for t in info.function_tools])
        return ModelResponse(parts=[TextPart("done")])

    def run(query: str) -> str:
        return "ok"

    toolset: FunctionToolset[Any] = FunctionToolset()
    catalog = [*CATALOG, BAD_TOOL] if fault.bad_tool else CATALOG
    for n, d in catalog:
        toolset.add_function(run, name=n, description=d)
    selected = SelectedToolset(toolset, embedder=fault.embedder, cache_dir=fault.cache_dir, **kw)
    result = Agent(FunctionModel(model), toolsets=[selected]).run_sync(fault.message)
    return seen, result, selected, [n for n, _ in catalog]


@pytest.mark.parametrize("name", FAULTS)
def test_pydantic_ai_fails_open(name: str, fault_of: Any, caplog: pytest.LogCaptureFixture) -> None:
    fault = fault_of(name, "pydantic_ai")
    caplog.set_level(logging.WARNING, logger="contextsieve.integrations")
    seen, result, selected, everything = _pydantic_run(fault)
    assert result.output == "done"  # the run completed
    if fault.cause is None:  # the query is read with the surrogate replaced: a real choice
        assert selected.last_error is None and _warnings(caplog) == []
        assert seen == [list(selected.last_choice.tools)] and "get_weather" in seen[0]
        return
    assert seen == [everything]
    _check_failed_open(selected, fault, everything, caplog)


@pytest.mark.parametrize("name", [f for f in FAULTS if f != "surrogate_in_message"])
def test_pydantic_ai_fail_open_false_raises_the_cause(name: str, fault_of: Any) -> None:
    fault = fault_of(name, "pydantic_ai")
    with pytest.raises(ToolChoiceError, match="Pydantic AI SelectedToolset") as raised:
        _pydantic_run(fault, fail_open=False)
    _check_cause(raised, fault)


def test_pydantic_ai_healthy_run_chooses(fault_of: Any, caplog: pytest.LogCaptureFixture) -> None:
    seen, _, selected, everything = _pydantic_run(fault_of("healthy", "pydantic_ai"))
    assert "get_weather" in seen[0] and len(seen[0]) < len(everything)
    assert selected.last_error is None and selected.last_choice.failed_open is False
    assert _warnings(caplog) == []


# -- OpenAI Agents SDK ------------------------------------------------------------------------------------


def _agents_run(fault: Fault, *, mcp: bool, **kw: Any) -> tuple[list[set[str]], Any, list[str]]:
    """A run with the catalog as function tools (and, with ``mcp``, the time MCP server) behind one
    filter; the model answers at once. Returns the tool names of each model call."""
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.mcp import MCPServerStdio
    from agents.testing import ScriptedModel, assistant_message

    from contextsieve.integrations.openai_agents import ContextSieveToolFilter

    set_tracing_disabled(True)

    def run(query: str) -> str:
        return "ok"

    catalog = [*CATALOG, BAD_TOOL] if fault.bad_tool else CATALOG
    tools = [function_tool(run, name_override=n, description_override=d) for n, d in catalog]
    sieve = ContextSieveToolFilter(
        embedder=fault.embedder, cache_dir=fault.cache_dir, message_of=fault.message_of, **kw
    )
    model = ScriptedModel([[assistant_message("done")]])
    everything = [n for n, _ in catalog] + (TIME_TOOLS if mcp else [])

    async def main() -> Any:
        servers = []
        if mcp:
            args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
            servers.append(
                MCPServerStdio(
                    params={"command": sys.executable, "args": args},
                    name="time",
                    tool_filter=sieve,
                    client_session_timeout_seconds=60,
                )
            )
        for s in servers:
            await s.connect()
        try:
            agent = Agent(name="a", model=model, tools=sieve.function_tools(tools), mcp_servers=servers)
            return await Runner.run(agent, fault.message)
        finally:
            for s in servers:
                await s.cleanup()

    result = asyncio.run(main())
    assert result.final_output == "done"
    return [{t.name for t in call.tools} for call in model.calls], sieve, everything


@pytest.mark.parametrize("name", FAULTS + MESSAGE_OF_FAULTS)
def test_openai_agents_fails_open(name: str, fault_of: Any, caplog: pytest.LogCaptureFixture) -> None:
    fault = fault_of(name, "openai_agents")
    caplog.set_level(logging.WARNING, logger="contextsieve.integrations")
    seen, sieve, everything = _agents_run(fault, mcp=True)
    assert seen == [set(everything)]  # the MCP tools and the function tools: all of them, nothing else
    _check_failed_open(sieve, fault, everything, caplog)


@pytest.mark.parametrize("name", FAULTS + MESSAGE_OF_FAULTS)
def test_openai_agents_fail_open_false_raises_the_cause(name: str, fault_of: Any) -> None:
    """Through a function tool's ``is_enabled`` the run fails with the typed error."""
    fault = fault_of(name, "openai_agents")
    with pytest.raises(ToolChoiceError, match="OpenAI Agents SDK ContextSieveToolFilter") as raised:
        _agents_run(fault, mcp=False, fail_open=False)
    _check_cause(raised, fault)


def test_openai_agents_healthy_run_chooses(fault_of: Any, caplog: pytest.LogCaptureFixture) -> None:
    seen, sieve, everything = _agents_run(fault_of("healthy", "openai_agents"), mcp=True)
    assert "get_weather" in seen[0] and len(seen[0]) < len(everything)
    assert sieve.last_error is None and sieve.last_choice.failed_open is False
    assert _warnings(caplog) == []


def test_fail_open_must_be_a_bool() -> None:
    from pydantic_ai.toolsets import FunctionToolset

    from contextsieve.integrations.langchain import ContextSieveMiddleware
    from contextsieve.integrations.openai_agents import ContextSieveToolFilter
    from contextsieve.integrations.pydantic_ai import SelectedToolset

    for make in (
        lambda: ContextSieveMiddleware(fail_open="yes"),
        lambda: SelectedToolset(FunctionToolset(), fail_open=1),
        lambda: ContextSieveToolFilter(fail_open=None),
    ):
        with pytest.raises(InputError, match="fail_open"):
            make()
