"""The agent-facing tools written once (contextsieve.session.agent_tools) and registered by thin
adapters: serve's list fits the budget and carries titles, annotations and limits; a bad argument comes
back as an error the model reads (MCP isError, a framework's retry); every surface shows the model the
same names, descriptions and argument schemas."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from contextsieve.agent.agentfile import example_agent_path
from contextsieve.engine import Engine
from contextsieve.errors import ToolArgumentError
from contextsieve.mcp_server.gateway import CONVERSATION_ARGUMENT
from contextsieve.mcp_server.server import build_server
from contextsieve.mcp_server.tool_surface import SESSION_ARGUMENT
from contextsieve.session.agent_tools import CONTEXT_TOOLS, SEARCH_TOOLS, SELECT_CONTEXT, SET_TASK, AgentTool
from contextsieve.session.stash_agent_tools import RETRIEVE_STASHED_CONTEXT, STASH_TOOLS
from contextsieve.stash.store import StashStore
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.mcp_results import refused, result


class StashFake(FakeEmbedder):
    model_id = "fake-bag-of-words/tool-surface"  # a stash keeps vectors on disk under a model id


#: Characters of serve's whole tool list (stash on) as a host puts it into every prompt; was 16,940.
BUDGET = 6000
READ_ONLY = {"search_tools", "explain", "retrieve_stashed_context", "list_stashed_context"}
DESTRUCTIVE = {"remove_from_session", "merge_stashed_context", "delete_stashed_context"}


@pytest.fixture()
def served(tmp_path: Path) -> tuple[Engine, StashStore]:
    engine = Engine.from_file(example_agent_path(), embedder=FakeEmbedder(), cache_dir=False)
    return engine, StashStore.open(tmp_path / "stash.db", StashFake())


def _listed(tool: Any) -> dict[str, Any]:
    """A listed tool as the model's prompt carries it (the fields a host sends: name, title, description,
    inputSchema, annotations)."""
    d = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {k: d[k] for k in ("name", "title", "description", "inputSchema", "annotations") if k in d}


def test_serve_lists_every_tool_within_the_budget_with_titles_annotations_and_limits(served: Any) -> None:
    engine, stash = served

    async def main() -> list[dict[str, Any]]:
        async with Client(build_server(engine, stash=stash)) as c:
            return [_listed(t) for t in (await c.list_tools()).tools]

    try:
        tools = anyio.run(main)
    finally:
        stash.close()
    assert [t["name"] for t in tools] == [t.name for t in (*CONTEXT_TOOLS, *STASH_TOOLS)]
    size = sum(len(json.dumps(t, ensure_ascii=False)) for t in tools)  # json.dumps' spaces: the larger count
    assert size <= BUDGET, size
    for t in tools:
        assert t["title"] and t["description"], t["name"]
        hints = t["annotations"]
        assert hints.get("readOnlyHint", False) is (t["name"] in READ_ONLY), t["name"]
        if t["name"] not in READ_ONLY:  # destructiveHint's default is true: a writing tool says which it is
            assert hints["destructiveHint"] is (t["name"] in DESTRUCTIVE), t["name"]
        assert t["inputSchema"]["properties"]["session"] == {"type": "string"}
        for name, prop in t["inputSchema"]["properties"].items():
            if prop.get("type") in ("integer",):
                assert "minimum" in prop, (t["name"], name)
    by = {t["name"]: t for t in tools}
    limit = by["search_tools"]["inputSchema"]["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 50, 5)
    # the session paragraph is said once: in select_context's description, not in any schema
    assert sum("back as session" in t["description"] for t in tools) == 1
    assert "back as session" in by["select_context"]["description"]


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("search_tools", {"query": "deploy", "limit": 80}, "limit must be from 1 to 50, got 80"),
        ("search_tools", {"query": "deploy", "limit": "5"}, "limit must be an integer"),
        ("search_tools", {"limit": 3}, "query is required"),
        ("search_tools", {"query": "deploy", "k": 3}, "unknown argument 'k'; it takes query, limit"),
        ("select_context", {"message": "hi", "preset": "fastest"}, "preset must be one of aggressive"),
        ("retrieve_stashed_context", {"query": "x", "top_k": 0}, "top_k must be from 1 to 1000"),
        ("stash_context", {"segments": []}, "segments must have 1 to 1000 items, got 0"),
        ("stash_context", {"segments": [{"type": "note"}]}, r"segments\[0\]: text is required"),
        ("stash_context", {"segments": [{"text": "x", "type": "note"}]}, "type must be one of message"),
        ("merge_stashed_context", {"segment_ids": ["nope"]}, "no segment"),
        ("explain", {"message": "x", "item": "rule:nope"}, "has no"),
        ("select_context", {"message": "hi", "session": "cs-guessed"}, "unknown or expired session handle"),
    ],
)
def test_a_bad_argument_is_an_error_result_that_says_how_to_fix_it(
    served: Any, tool: str, args: dict[str, Any], says: str
) -> None:
    engine, stash = served

    async def main() -> None:
        async with Client(build_server(engine, stash=stash)) as c:
            await refused(c.call_tool(tool, args), says)
            assert result(await c.call_tool("search_tools", {"query": "deploy"}))["tools"]  # the server goes on

    try:
        anyio.run(main)
    finally:
        stash.close()


def test_the_check_against_plain_cases() -> None:
    """AgentTool.check: defaults filled, integral floats taken as integers, bools never numbers."""
    assert SEARCH_TOOLS.check({"query": "q"}) == {"query": "q", "limit": 5}
    assert SEARCH_TOOLS.check({"query": "q", "limit": 7.0}) == {"query": "q", "limit": 7}
    for bad in ({"query": "q", "limit": True}, {"query": "q", "limit": 7.5}, {"query": 3}, "q", ["q"]):
        with pytest.raises(ToolArgumentError):
            SEARCH_TOOLS.check(bad)
    with pytest.raises(ToolArgumentError, match="min_similarity must be from -1 to 1, got nan"):
        RETRIEVE_STASHED_CONTEXT.check({"query": "q", "min_similarity": float("nan")})
    assert SELECT_CONTEXT.check({"message": "m", "session": "h"}, extra=("session",))["session"] == "h"


def _mcp_definition(tool: AgentTool, extra: Any = None) -> dict[str, Any]:
    return tool.definition(extra)


def test_every_adapter_shows_the_model_the_same_tools(served: Any, tmp_path: Path) -> None:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from contextsieve.integrations.langchain import stash_tools as langchain_tools
    from contextsieve.integrations.openai_agents import stash_tools as agents_tools
    from contextsieve.integrations.pydantic_ai import stash_toolset
    from contextsieve.mcp_server.gateway import build_gateway

    engine, stash = served
    names = [t.name for t in STASH_TOOLS]
    try:

        async def listings() -> tuple[list[Any], list[Any]]:
            async with Client(build_server(engine, stash=stash)) as c:
                serve = (await c.list_tools()).tools
            async with Client(build_gateway(engine), mode="legacy") as c:
                gateway = (await c.list_tools()).tools
            return serve, gateway

        serve, gateway = anyio.run(listings)
        for t in serve:
            tool = next(x for x in (*CONTEXT_TOOLS, *STASH_TOOLS) if x.name == t.name)
            assert _listed(t) == _mcp_definition(tool, SESSION_ARGUMENT)
        own = [t for t in gateway if t.name in ("set_task", "select_context", "search_tools")]
        for t in own:
            tool = {x.name: x for x in (SET_TASK, SELECT_CONTEXT, SEARCH_TOOLS)}[t.name]
            assert _listed(t) == _mcp_definition(tool, CONVERSATION_ARGUMENT)
        pyd = stash_toolset(stash, session="s", tools=names)
        sdk = agents_tools(stash, session="s", tools=names)
        lc = langchain_tools(stash, session="s", tools=names)
        for tool, p, a, lang in zip(STASH_TOOLS, pyd.tools.values(), sdk, lc):
            schema = tool.input_schema()
            assert (p.name, p.description, p.function_schema.json_schema) == (tool.name, tool.description, schema)
            assert (a.name, a.description, a.params_json_schema) == (tool.name, tool.description, schema)
            fn = convert_to_openai_tool(lang)["function"]
            assert (fn["name"], fn["description"], fn["parameters"]) == (tool.name, tool.description, schema)
    finally:
        stash.close()


def test_framework_stash_tools_run_and_refuse_the_same_way(tmp_path: Path) -> None:
    """LangChain's tools stash, retrieve and merge; a bad argument is the message the model reads;
    the Agents SDK's tool answers the same refusal to its model."""
    from agents import Agent, Runner, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from contextsieve.integrations.langchain import stash_tools as langchain_tools
    from contextsieve.integrations.openai_agents import stash_tools as agents_tools

    set_tracing_disabled(True)
    with StashStore.open(tmp_path / "s.db", StashFake()) as store:
        stash, retrieve, merge = langchain_tools(store, session="lc")
        done = json.loads(stash.invoke({"segments": [{"text": "The release is on Tuesday", "type": "decision"}]}))
        found = json.loads(retrieve.invoke({"query": "when is the release"}))
        assert found["segments"][0]["segment_id"] == done["segment_ids"][0]
        assert "top_k must be from 1 to 1000" in retrieve.invoke({"query": "release", "top_k": 0})
        assert "no segment" in merge.invoke({"segment_ids": ["missing"]})
        assert store.list(session="default") == []
        model = ScriptedModel(
            [
                [function_call("retrieve_stashed_context", {"query": "release", "top_k": 0}, call_id="r1")],
                [assistant_message("ok")],
            ]
        )
        asyncio.run(Runner.run(Agent(name="a", model=model, tools=agents_tools(store, session="lc")), "go"))
        outputs = [i for i in model.calls[1].input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        assert "top_k must be from 1 to 1000" in str(outputs[0]["output"])


def test_serve_takes_each_select_context_call_as_a_user_message_of_its_own(served: Any) -> None:
    """``select_context`` is called with each user message: every call is a task's first request (as the
    gateway's), so the same message offers the same tools on a session's first call and its later ones
    (not a later step's smaller offer)."""
    engine, stash = served
    message = "Open a pull request for the fix, then tell the customer when the refund lands."

    async def main() -> list[list[str]]:
        async with Client(build_server(engine, stash=stash)) as c:
            first = result(await c.call_tool("select_context", {"message": message}))
            handle = first["session"]
            offers = [[t["name"] for t in first["tools"]]]
            for _ in range(2):
                again = result(await c.call_tool("select_context", {"message": message, "session": handle}))
                offers.append([t["name"] for t in again["tools"]])
            return offers

    try:
        offers = anyio.run(main)
    finally:
        stash.close()
    assert len(offers[0]) > 5  # more than a step's base of 5 (tool_base_n)
    assert offers[1] == offers[0] and offers[2] == offers[0]


def test_serve_explains_the_request_select_context_returned(served: Any) -> None:
    """``explain`` builds the request as ``select_context`` does (a task's first), so every tool it
    returned is explained as included, on a session's later calls too."""
    engine, stash = served
    message = "Search the web for the latest release notes and save them to a file."

    async def main() -> list[tuple[str, bool]]:
        async with Client(build_server(engine, stash=stash)) as c:
            first = result(await c.call_tool("select_context", {"message": message}))
            again = result(await c.call_tool("select_context", {"message": message, "session": first["session"]}))
            out = []
            for item in [i for i in again["items"] if i["type"] == "tool"]:
                key = f"tool:{item['serverName']}:{item['name']}"
                ex = result(
                    await c.call_tool("explain", {"message": message, "item": key, "session": first["session"]})
                )
                out.append((key, ex["included"]))
            return out

    try:
        explained = anyio.run(main)
    finally:
        stash.close()
    assert len(explained) > 5 and all(included for _, included in explained), explained
