"""The frameworks' stash tools stash under the agent's own namespace (``agent:<identity>``, what
``contextsieve serve`` uses for the same agent file) or under one the caller names, never under a default
every application on one store would share: two applications on one store keep to their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from langchain_core.tools import StructuredTool

from contextsieve import Engine
from contextsieve.errors import InputError
from contextsieve.integrations.langchain import stash_tools as langchain_stash_tools
from contextsieve.integrations.openai_agents import stash_tools as agents_stash_tools
from contextsieve.integrations.pydantic_ai import stash_toolset
from contextsieve.integrations.selector import ToolSelector, ToolSpec
from contextsieve.integrations.stash_tools import agent_namespace
from contextsieve.stash.store import StashStore

SALARY = "The salary of employee 12 is 81,000 EUR a year."


def test_no_agent_and_no_namespace_is_refused(int8, tmp_path: Path) -> None:  # noqa: ANN001
    with StashStore.open(tmp_path / "s.db", int8) as store:
        for make in (
            lambda: stash_toolset(store),
            lambda: langchain_stash_tools(store),
            lambda: agents_stash_tools(store),
        ):
            with pytest.raises(InputError, match="say whose stash it is"):
                make()
        with pytest.raises(InputError, match="not both"):
            stash_toolset(store, agent=ToolSelector.from_tools([ToolSpec("t")], embedder=int8), session="x")
        with pytest.raises(InputError, match="must be a contextsieve Agent"):
            stash_toolset(store, agent="billing")


def test_two_applications_on_one_store_keep_to_their_own(int8, tmp_path: Path) -> None:  # noqa: ANN001
    billing = ToolSelector.from_tools([ToolSpec("pay")], name="billing", embedder=int8, cache_dir=False)
    hr = ToolSelector.from_tools([ToolSpec("hire")], name="hr", embedder=int8, cache_dir=False)
    with StashStore.open(tmp_path / "shared.db", int8) as store:
        mine = {t.name: t for t in langchain_stash_tools(store, agent=billing)}
        theirs = {t.name: t for t in langchain_stash_tools(store, agent=hr)}
        assert all(isinstance(t, StructuredTool) for t in (*mine.values(), *theirs.values()))
        mine["stash_context"].invoke({"segments": [{"text": SALARY}]})
        found = json.loads(theirs["retrieve_stashed_context"].invoke({"query": "salary of employee 12"}))
        assert found["segments"] == []
        found = json.loads(mine["retrieve_stashed_context"].invoke({"query": "salary of employee 12"}))
        assert [s["text"] for s in found["segments"]] == [SALARY]
        assert [s.text for s in store.list(session="agent:billing")] == [SALARY]


def test_an_agent_files_namespace_is_the_one_serve_uses(int8, tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / "desk" / "agent.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump({"name": "travel-desk", "systemPrompt": "You help travellers."}))
    engine = Engine.from_file(path, embedder=int8, cache_dir=False)
    assert agent_namespace(engine, None, "x") == "agent:" + engine.agent.identity
    assert agent_namespace(engine.agent, None, "x") == agent_namespace(engine, None, "x")
    from contextsieve.mcp_server.common import ServeConfig, SessionRegistry

    assert SessionRegistry(engine, ServeConfig()).default_namespace() == agent_namespace(engine, None, "x")
