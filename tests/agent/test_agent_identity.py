"""An agent's identity starts from its declared name (the top-level ``name:`` the README shows, or
``metadata.name``), and two agent files, even named alike, never share a stash unless the user points
them at one store and namespace on purpose (how an identity follows a file over time:
tests/agent/test_identity_over_time.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters

from contextsieve.agent.agent import Agent
from contextsieve.agent.agentfile import load_agent, save_agent
from contextsieve.errors import AgentFileError
from tests.helpers.mcp_results import result

SECRET = "Payroll for March is released on the 28th; the bank file password is tangerine-42"


def _agent_file(folder: Path, name: str | None, **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc: dict[str, object] = {"systemPrompt": "You help.", **extra}
    if name is not None:
        doc = {"name": name, **doc}
    path = folder / "agent.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_declared_name_is_read_and_kept_where_the_file_has_it(tmp_path: Path) -> None:
    path = _agent_file(tmp_path / "a", "billing-bot")
    agent = load_agent(path)
    assert agent.name == "billing-bot"  # was "agent" (the stem): the top-level name was ignored
    agent.name = "billing-bot-2"
    save_agent(agent, path)
    saved = yaml.safe_load(path.read_text())
    assert saved["name"] == "billing-bot-2" and "name" not in (saved.get("metadata") or {})
    assert load_agent(_agent_file(tmp_path / "b", None, metadata={"name": "hr-bot"})).name == "hr-bot"
    assert load_agent(_agent_file(tmp_path / "c", None)).name == "agent"
    same = _agent_file(tmp_path / "d", "hr-bot", metadata={"name": "hr-bot"})
    assert load_agent(same).name == "hr-bot"
    with pytest.raises(AgentFileError, match="differs from metadata.name"):
        load_agent(_agent_file(tmp_path / "e", "hr-bot", metadata={"name": "billing-bot"}))
    with pytest.raises(AgentFileError, match="name: must be a non-empty string"):
        load_agent(_agent_file(tmp_path / "f", ""))


def test_two_agent_yaml_files_have_two_identities(tmp_path: Path) -> None:
    a = load_agent(_agent_file(tmp_path / "a", None))
    b = load_agent(_agent_file(tmp_path / "b", None))
    assert a.name == b.name == "agent" and a.identity != b.identity
    assert load_agent(tmp_path / "a" / "agent.yaml").identity == a.identity  # stable across loads
    assert load_agent(tmp_path / "a" / ".." / "a" / "agent.yaml").identity == a.identity  # and paths to it
    assert a.identity.startswith("agent-") and len(a.identity) == len("agent-") + 10
    assert Agent(name="made in code").identity == "made-in-code"


def _serve(agent: Path, model_cache: Path, data: Path) -> StdioServerParameters:
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(data)}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "contextsieve", "serve", str(agent), "--offline"], env=env
    )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_two_agents_named_alike_never_see_each_others_segments(
    model_cache: Path,
    int8,  # noqa: ANN001
    tmp_path: Path,
    mode: str,
) -> None:
    """The issue's reproduction: billing-bot and hr-bot, each an ``agent.yaml`` in its own folder, served
    one after the other with the same data folder (the default store) and no handle."""
    data = tmp_path / "data"
    billing = _agent_file(tmp_path / "billing", None)
    hr = _agent_file(tmp_path / "hr", None)

    async def stash() -> None:
        async with Client(_serve(billing, model_cache, data), mode=mode, read_timeout_seconds=120) as c:
            result(await c.call_tool("stash_context", {"segments": [{"text": SECRET}]}))
            found = result(await c.call_tool("retrieve_stashed_context", {"query": "payroll bank password"}))
            assert [s["text"] for s in found["segments"]] == [SECRET]  # its own agent finds it

    async def other() -> tuple[list[str], list[str]]:
        async with Client(_serve(hr, model_cache, data), mode=mode, read_timeout_seconds=120) as c:
            found = result(await c.call_tool("retrieve_stashed_context", {"query": "payroll bank password"}))
            ctx = result(await c.call_tool("select_context", {"message": "what is the bank file password?"}))
            return [s["text"] for s in found["segments"]], [t["text"] for t in ctx["texts"] if t["type"] == "stash"]

    anyio.run(stash)
    found, in_prompt = anyio.run(other)
    assert found == [] and in_prompt == []


def test_a_store_an_earlier_version_shared_is_named_not_read(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    """The default store was stash/<name>.db, shared by every agent of that name: serve does not read it
    now, and says on stderr how to (its own store is stash/<identity>.db)."""
    from contextsieve.stash.store import StashStore

    data = tmp_path / "data"
    (data / "stash").mkdir(parents=True)
    StashStore.open(data / "stash" / "agent.db", int8).close()
    agent = _agent_file(tmp_path / "billing", None)
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(data)}
    done = subprocess.run(
        [sys.executable, "-m", "contextsieve", "serve", str(agent), "--offline"],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    identity = load_agent(agent).identity
    assert (data / "stash" / f"{identity}.db").is_file()
    assert f"--stash {data / 'stash' / 'agent.db'} --stash-session agent:agent" in done.stderr, done.stderr
