"""One name per tool that every provider accepts, unique within the agent, stable
across engines and processes, readable where the plain name is valid, and read back to the right tool
by every surface (the four payloads and their tool_reference / tool_search_output items,
record_outcome, the gateway, ToolSelector)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp.client import Client

from contextsieve import Engine
from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Tool
from contextsieve.agent.toolnames import RESERVED_TOOL_NAMES, TOOL_NAME_PATTERN, tool_names
from contextsieve.errors import UnknownItemError
from tests.helpers.fake_embedder import FakeEmbedder

LONG = "x" * 128
#: (server, tool, description): the awkward names of issue 37 (6 of 9 were invalid for providers)
AWKWARD = [
    ("github", "github.create_issue", "Create an issue in a GitHub repository"),
    ("Ant Design Components", "get-component-docs", "Read the documentation of an Ant Design component"),
    ("com.example.weather", "get_forecast", "Get the weather forecast for a city"),
    ("meteo", "prévision_météo", "Prévision météo pour une ville"),
    ("tianqi", "查询天气", "查询城市天气"),
    ("long", LONG, "A tool with a 128 character name"),
    ("a_b", "c", "Get the weather forecast for tomorrow"),
    ("a", "b_c", "Delete every record in the warehouse database"),
    ("files", "read_file", "Read a file from disk"),
]


def key(server: str, tool: str) -> ItemKey:
    return ItemKey(ItemKind.TOOL, tool, server)


def awkward_agent(include: IncludeMode = IncludeMode.ALWAYS) -> Agent:
    agent = Agent(name="awkward")
    for server in dict.fromkeys(s for s, _, _ in AWKWARD):
        agent.add_server(McpServer(server, default_include=include, default_permission_required=False))
    for server, tool, description in AWKWARD:
        agent.upsert(Tool(server, tool, description, {"type": "object"}))
    return agent


def test_the_naming_rule() -> None:
    names = tool_names(key(s, t) for s, t, _ in AWKWARD)
    assert len(names) == len(AWKWARD)
    for s, t, _ in AWKWARD:
        n = names.name(key(s, t))
        assert TOOL_NAME_PATTERN.fullmatch(n), n
        assert names.key(n) == key(s, t) and names[n] == key(s, t)  # the way back
    # readable where the plain name is valid and unique
    assert names.name(key("files", "read_file")) == "files_read_file"
    # folded and suffixed where not
    assert names.name(key("github", "github.create_issue")).startswith("github_github_create_issue_")
    assert names.name(key("Ant Design Components", "get-component-docs")).startswith("Ant_Design_Components_get-")
    assert names.name(key("com.example.weather", "get_forecast")).startswith("com_example_weather_get_forecast_")
    assert names.name(key("meteo", "prévision_météo")).startswith("meteo_prevision_meteo_")
    assert names.name(key("tianqi", "查询天气")).startswith("tianqi_")
    assert len(names.name(key("long", LONG))) == 64
    # a collision of plain names: neither keeps a_b_c, so neither points at the other
    a, b = names.name(key("a_b", "c")), names.name(key("a", "b_c"))
    assert a != b and "a_b_c" not in names and a.startswith("a_b_c_") and b.startswith("a_b_c_")
    with pytest.raises(UnknownItemError):
        names.key("a_b_c")
    with pytest.raises(UnknownItemError):
        names.name(key("nope", "nothing"))


def test_names_are_stable_whatever_the_order_and_the_process() -> None:
    keys = [key(s, t) for s, t, _ in AWKWARD]
    first = tool_names(keys)
    shuffled = keys[:]
    random.Random(5).shuffle(shuffled)
    assert {k: first.name(k) for k in keys} == {k: tool_names(shuffled).name(k) for k in keys}
    # another process (another hash seed) gives the same names
    code = (
        "import json, sys; from contextsieve.agent.items import ItemKey, ItemKind; "
        "from contextsieve.agent.toolnames import tool_names; "
        "ks=[ItemKey(ItemKind.TOOL, t, s) for s, t in json.loads(sys.stdin.read())]; "
        "n=tool_names(ks); print(json.dumps([n.name(k) for k in ks]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([[s, t] for s, t, _ in AWKWARD]),
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    )
    assert json.loads(out.stdout) == [first.name(k) for k in keys]
    # a tool's name does not move when unrelated tools come and go
    fewer = tool_names(keys[:3])
    assert all(fewer.name(k) == first.name(k) for k in keys[:3])


def test_reserved_and_literal_clashes() -> None:
    # a tool whose plain name is one of contextsieve's own tools' names
    names = tool_names([key("search", "tools"), key("set", "task")])
    assert not (set(names) & RESERVED_TOOL_NAMES)
    # a tool literally named as another tool's suffixed name cannot take it: a plain name that ends as a
    # hashed name does is hashed itself, so the tool keeps its name whichever listing comes first
    suffixed = tool_names([key("a_b", "c"), key("a", "b_c")]).name(key("a_b", "c"))
    server, _, tool = suffixed.partition("_")
    clash = tool_names([key("a_b", "c"), key("a", "b_c"), key(server, tool)])
    assert len(set(clash)) == 3 and clash.name(key("a_b", "c")) == suffixed
    claimer = clash.name(key(server, tool))
    assert claimer != suffixed and claimer.startswith(suffixed + "_") and TOOL_NAME_PATTERN.fullmatch(claimer)


def _all_payload_names(request: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    out["openai"] = [t["function"]["name"] for t in request.openai()["tools"]]
    out["anthropic"] = [t["name"] for t in request.anthropic()["tools"]]
    deferred = request.anthropic(tools="deferred")
    out["anthropic deferred"] = [t["name"] for t in deferred["tools"]]
    out["tool_reference"] = [b["tool_name"] for b in deferred["messages"][-1]["content"][0]["content"]]
    responses = request.openai_responses(tools="deferred")
    out["responses deferred"] = [t["name"] for t in responses["tools"] if t.get("type") == "function"]
    out["tool_search_output"] = [t["name"] for t in responses["input"][-1]["tools"]]
    out["responses"] = [t["name"] for t in request.openai_responses()["tools"]]
    return out


def test_every_payload_names_every_tool_validly_and_maps_back() -> None:
    engine = Engine(awkward_agent(IncludeMode.AGENT), embedder=FakeEmbedder(), cache_dir=False)
    session = engine.session()
    for s, t, _ in AWKWARD:
        session.add(key(s, t))  # every tool in the request
    request = session.build_request("weather forecast and warehouse records")
    payloads = _all_payload_names(request)
    assert len(payloads["openai"]) == len(AWKWARD)
    for where, names in payloads.items():
        assert names, where
        assert len(names) == len(set(names)), where
        for n in names:
            assert TOOL_NAME_PATTERN.fullmatch(n), (where, n)
            if n != "search_tools":
                assert request.tool_key(n) in {key(s, t) for s, t, _ in AWKWARD}
    # the same names from a second engine over the same tools
    other = Engine(awkward_agent(IncludeMode.AGENT), embedder=FakeEmbedder(), cache_dir=False).session()
    for s, t, _ in AWKWARD:
        other.add(key(s, t))
    assert _all_payload_names(other.build_request("weather forecast and warehouse records")) == payloads


def test_record_outcome_reads_a_name_back_to_its_own_tool() -> None:
    engine = Engine(awkward_agent(IncludeMode.AGENT), embedder=FakeEmbedder(), cache_dir=False)
    session = engine.session()
    request = session.build_request("delete every record in the warehouse database")
    warehouse = engine.agent.tool_names().name(key("a", "b_c"))
    done = session.record_outcome(request, called=[warehouse])
    assert done["examples"] == ["tool:a:b_c"]
    assert session.outcomes["tool:a:b_c"]["called"] == 1 and "tool:a_b:c" not in {
        k for k, v in session.outcomes.items() if v["called"]
    }
    with pytest.raises(UnknownItemError):
        session.record_outcome(request, called=["a_b_c"])  # the ambiguous plain name is no tool's


def test_tool_selector_offers_the_tool_the_message_asks_for() -> None:
    from contextsieve.integrations.selector import ToolSelector, ToolSpec

    specs = [ToolSpec(t, d, {"type": "object"}, server=s) for s, t, d in AWKWARD]
    selector = ToolSelector.from_tools(specs, embedder=FakeEmbedder(), cache_dir=False)
    choice = selector.choose("delete every record in the warehouse database")
    assert key("a", "b_c") in choice.keys
    assert key("a_b", "c") not in choice.keys[:1]
    assert choice.tools[choice.keys.index(key("a", "b_c"))] == "b_c"  # the framework's own name


def test_the_gateway_lists_valid_names_and_forwards_each_to_its_own_tool(tmp_path: Path) -> None:
    """Real downstream stdio servers (tests/data/mcp_test_server.py) whose tools have the awkward names;
    the host lists and calls them through the gateway."""
    from contextsieve.mcp_server.gateway import build_gateway

    server_py = Path(__file__).parents[1] / "data" / "mcp_test_server.py"
    servers: dict[str, Any] = {}
    for i, server in enumerate(dict.fromkeys(s for s, _, _ in AWKWARD)):
        tools = [{"name": t, "description": d} for s, t, d in AWKWARD if s == server]
        (tmp_path / f"tools{i}.json").write_text(json.dumps(tools))
        servers[server] = {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(server_py), str(tmp_path / f"tools{i}.json")],
            "serverToolDefaults": {"include": "always"},
        }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump({"name": "gw", "mcpServers": servers}, allow_unicode=True))
    engine = Engine.from_file(tmp_path / "agent.yaml", embedder=FakeEmbedder(), cache_dir=tmp_path / "cache")
    engine.connect()
    names = engine.agent.tool_names()

    async def main() -> None:
        async with Client(build_gateway(engine), mode="legacy") as c:
            listed = {t.name for t in (await c.list_tools()).tools}
            own = {"set_task", "select_context", "search_tools"}
            assert listed - own == {names.name(key(s, t)) for s, t, _ in AWKWARD}
            assert all(TOOL_NAME_PATTERN.fullmatch(n) for n in listed)
            for s, t, _ in AWKWARD:
                result = await c.call_tool(names.name(key(s, t)), {"n": 1})
                echoed = json.loads(result.content[0].text)  # type: ignore[union-attr]
                assert echoed == {"tool": t, "n": 1}, (s, t)

    anyio.run(main)
