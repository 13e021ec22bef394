"""An item key's string form reads back as the key for every legal MCP name: ``:`` and ``%`` in a server
or tool name are escaped (``%3A``, ``%25``), so a proxy's ``github:create_issue`` or a server key
``github:enterprise`` work in session files, the usage log, explanations and outcome records; and
serve's and the gateway's own tool names are never given to an agent's tool."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from contextsieve import Engine
from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Rule, Tool
from contextsieve.agent.toolnames import RESERVED_TOOL_NAMES, tool_names
from contextsieve.agent.usage import UsageLog
from contextsieve.errors import InputError
from contextsieve.session.agent_tools import CONTEXT_TOOLS, SEARCH_TOOLS, SET_TASK
from contextsieve.session.stash_agent_tools import STASH_TOOLS
from tests.helpers.fake_embedder import FakeEmbedder

AWKWARD = ["github:create_issue", "a%3Ab", "50%", ":", "%", "x::y", "%25", "tool:x", "é:ü", "plain"]


def test_every_key_reads_back_as_itself() -> None:
    rng = random.Random(47)
    for server in AWKWARD:
        for tool in AWKWARD:
            key = ItemKey(ItemKind.TOOL, tool, server)
            text = str(key)
            assert text.count(":") == 2 and ItemKey.parse(text) == key, text
    for _ in range(500):
        parts = ["".join(rng.choice(":%3Aa_-é25 ") for _ in range(rng.randint(1, 8))) for _ in range(2)]
        key = ItemKey(ItemKind.TOOL, parts[0], parts[1])
        assert ItemKey.parse(str(key)) == key
    assert str(ItemKey(ItemKind.TOOL, "create_issue", "github")) == "tool:github:create_issue"  # as before
    assert str(ItemKey(ItemKind.TOOL, "github:create_issue", "gh")) == "tool:gh:github%3Acreate_issue"
    for bad in ("tool:a:b:c", "tool:a:", "rule:", "rule:a:b", "tool:a"):
        with pytest.raises(InputError):
            ItemKey.parse(bad)


def _proxy_agent() -> Agent:
    agent = Agent(name="proxy", rules=[Rule("fares", "Quote fares in EUR.", include=IncludeMode.AGENT)])
    agent.add_server(McpServer("github:enterprise", default_include=IncludeMode.ALWAYS))
    agent.upsert(Tool("github:enterprise", "issues:create", "Open an issue", {"type": "object"}))
    agent.upsert(Tool("github:enterprise", "issues:list", "List the issues", {"type": "object"}))
    return agent


def test_sessions_outcomes_and_explanations_name_such_tools(tmp_path: Path) -> None:
    engine = Engine(_proxy_agent(), embedder=FakeEmbedder(), cache_dir=False)
    session = engine.session()
    key = ItemKey(ItemKind.TOOL, "issues:create", "github:enterprise")
    session.add(ItemKey(ItemKind.RULE, "fares"))
    request = session.build_request("open an issue about the login page")
    assert {request.tool_key(t["name"]) for t in request.tools} == {key, key._replace(name="issues:list")}
    path = tmp_path / "session.json"
    session.save(path)
    loaded = engine.load_session(path)  # was: "not an item key: 'tool:github:enterprise:issues:create'"
    assert dict(loaded.items()) == dict(session.items())
    assert loaded.explain("open an issue", str(key)).key == str(key)
    session.record_outcome(request, [request.names.name(key)])
    session.record_tool_calls("open an issue about the login page", [str(key)])
    log = UsageLog(tmp_path / "usage.sqlite", keep_text=True)
    log.record("proxy", "open an issue", [key])
    assert log.examples("proxy", 3) == {key: ("open an issue",)}


def test_own_tool_names_are_reserved() -> None:
    own = {t.name for t in (*CONTEXT_TOOLS, *STASH_TOOLS, SEARCH_TOOLS, SET_TASK)}
    assert own <= RESERVED_TOOL_NAMES, own - RESERVED_TOOL_NAMES
    names = tool_names([ItemKey(ItemKind.TOOL, "context", "stash"), ItemKey(ItemKind.TOOL, "task", "set")])
    assert not set(names) & RESERVED_TOOL_NAMES  # server stash's tool context is not offered as stash_context
