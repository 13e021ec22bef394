"""A request's tool catalog (``Request.catalog`` / ``always``: what a deferred offer declares) is kept with
the agent's item table instead of being built for every request (0.28 ms on a 507-tool agent,
``benchmarks.speed.tool_catalog``): the same catalog while the agent is unchanged, a new one when its
tools, their names or the session's tool access change, and no request's edits reaching another's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from contextsieve import OfferConfig
from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Tool
from contextsieve.agent.toolnames import NameBook
from contextsieve.engine import Engine
from contextsieve.session.assembly import tool_definition
from tests.helpers.fake_embedder import FakeEmbedder


def agent(autonomous: bool = False) -> Agent:
    return Agent(
        name="travel",
        autonomous=autonomous,
        servers={"w": McpServer("w", default_include=IncludeMode.AGENT), "t": McpServer("t")},
        tools=[
            Tool("w", "forecast", "weather forecast for a city", permission_required=False),
            Tool("w", "air_quality", "air quality for a city"),
            Tool("t", "flights", "search flights to a city", include=IncludeMode.AGENT, permission_required=False),
            Tool("t", "hotels", "book hotels in a city"),
        ],
    )


def oracle(a: Agent, usable: list[Tool]) -> tuple[list[dict], set[str]]:
    """The catalog as each request built it before: every usable tool's definition, sorted by name."""
    names = a.tool_names()
    defs = sorted((tool_definition(t, names) for t in usable), key=lambda d: d["name"])
    return defs, {names.name(t.key) for t in usable if a.include_mode(t) is IncludeMode.ALWAYS}


def test_the_catalog_is_kept_while_the_agent_is_unchanged_and_follows_its_changes(tmp_path: Path) -> None:
    a = agent()
    s = Engine(a, embedder=FakeEmbedder(), cache_dir=tmp_path).session()
    first, second = s.build_request("rain in Paris"), s.build_request("flights to Rome")
    assert first.catalog is second.catalog  # kept, not built again
    want, always = oracle(a, a.tools)
    assert list(first.catalog) == want and first.always == always == {"t_hotels"}

    a.upsert(Tool("w", "forecast", "weather forecast for a city, hourly", permission_required=False))
    a.upsert(Tool("w", "uv_index", "the UV index of a city"))
    third = s.build_request("rain in Paris")
    assert third.catalog is not first.catalog
    assert list(third.catalog) == oracle(a, a.tools)[0]
    assert {d["name"] for d in third.catalog} >= {"w_uv_index"}
    assert next(d for d in third.catalog if d["name"] == "w_forecast")["description"].endswith("hourly")


def test_new_tool_names_give_a_new_catalog(tmp_path: Path) -> None:
    """The registry's name book (the names a tool was offered under before) replaces the names given so far."""
    a = agent()
    s = Engine(a, embedder=FakeEmbedder(), cache_dir=tmp_path).session()
    before = s.build_request("rain in Paris")
    a.use_name_book(NameBook({ItemKey(ItemKind.TOOL, "forecast", "w"): "w_forecast_2"}))
    after = s.build_request("rain in Paris")
    assert after.catalog is not before.catalog
    assert [d["name"] for d in after.catalog] == ["t_flights", "t_hotels", "w_air_quality", "w_forecast_2"]


def test_an_autonomous_sessions_catalog_holds_the_tools_it_may_use(tmp_path: Path) -> None:
    a = agent(autonomous=True)
    e = Engine(a, embedder=FakeEmbedder(), cache_dir=tmp_path)
    free = [t for t in a.tools if not a.permission_required(t)]
    by_access = {
        "tool": oracle(a, free)[0],
        "never": oracle(a, a.tools)[0],
        "always": [],
    }
    for mode, want in by_access.items():
        r = e.session(tool_permission=mode).build_request("rain in Paris")
        assert list(r.catalog) == want, mode
        assert r.always == {d["name"] for d in want if d["name"] == "t_hotels"}, mode


def test_editing_one_requests_tools_changes_no_other_request(tmp_path: Path) -> None:
    """A host marks the last offered tool for the prompt cache (``cache_control``), as Anthropic's users do:
    the stable offer's tools come from the catalog the requests share, so they are copies."""
    a = agent()
    s = Engine(a, embedder=FakeEmbedder(), cache_dir=tmp_path).session(offer=OfferConfig(mode="stable", budget=10))
    first = s.build_request("rain in Paris")
    for t in first.tools:
        t["cache_control"] = {"type": "ephemeral"}
        t["description"] = "edited"
    s.record_reply(first, "ok")
    second = s.build_request("flights to Rome")
    assert all("cache_control" not in d and d["description"] != "edited" for d in second.catalog)
    assert all("cache_control" not in d and d["description"] != "edited" for d in second.tools)


def test_editing_a_payloads_schema_changes_no_other_request(tmp_path: Path) -> None:
    """A tool declared without a schema gets ``{"type": "object"}``; kept in the shared catalog, a host's
    edit of it in one payload (``additionalProperties``, strict mode) reached every later request."""
    a = agent()
    e = Engine(a, embedder=FakeEmbedder(), cache_dir=tmp_path)
    s = e.session(offer=OfferConfig(mode="stable", budget=10))
    first = s.build_request("rain in Paris")
    payloads = [
        first.anthropic(tools="deferred")["tools"][1:],
        first.anthropic()["tools"],
        first.openai_responses(tools="deferred")["tools"][1:],
        [t["function"] for t in first.openai()["tools"]],
    ]
    for tools in payloads:
        for t in tools:
            (t.get("input_schema") or t["parameters"])["additionalProperties"] = False
    s.record_reply(first, "ok")
    for r in (s.build_request("flights to Rome"), e.session().build_request("hotels in Rome")):
        schemas = [d["input_schema"] for d in r.catalog] + [t["input_schema"] for t in r.tools]
        assert schemas and all(x == {"type": "object"} for x in schemas)
    assert all(t.input_schema == {} for t in a.tools)


def test_a_replaced_tool_list_is_seen_even_when_it_reuses_the_old_lists_id(tmp_path: Path) -> None:
    """The item table told a replaced list by its ``id`` and length. Replacing ``agent.tools`` twice between
    two requests frees the list the table was built from, and the second new list may take its id: the
    request kept the old catalog (and search). The table now holds the lists it was built from, so none is
    freed while it is current (on the code before, this failed at the first round)."""
    a = agent()
    s = Engine(a, embedder=FakeEmbedder(), cache_dir=tmp_path).session()
    for n in range(20):
        s.build_request("rain in Paris")
        for k in range(2):  # no other list made in between: the second may take the freed first's id
            a.tools = [dataclasses.replace(t, description=f"{t.name} v{n}.{k}") for t in a.tools]
        r = s.build_request("rain in Paris")
        assert [d["description"] for d in r.catalog] == [d["description"] for d in oracle(a, a.tools)[0]]


def test_a_replaced_tool_list_that_drops_an_always_tool_leaves_it_out(tmp_path: Path) -> None:
    """``agent.has`` read a key index rebuilt only by ``upsert`` and the like: after ``agent.tools`` was
    replaced by a list without the ``always`` tool ``t_hotels``, the session still listed it, and the
    request raised ``UnknownItemError`` once a lookup of the new tool rebuilt the index."""
    a = agent()
    s = Engine(a, embedder=FakeEmbedder(), cache_dir=tmp_path).session()
    assert "t_hotels" in {t["name"] for t in s.build_request("rain in Paris").tools}
    a.tools = [t for t in a.tools if t.name != "hotels"] + [Tool("t", "trains", "book trains to a city")]
    r = s.build_request("book trains to Paris")
    names = {t["name"] for t in r.tools}
    assert "t_hotels" not in names and "t_trains" in names
    assert [d["name"] for d in r.catalog] == [d["name"] for d in oracle(a, a.tools)[0]]
